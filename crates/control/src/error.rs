//! The one error type of this crate: what went wrong, with enough context (rule index,
//! family, the tool's own stderr) for an operator to fix it without re-running by hand.

use crate::args::MatchError;
use relay_core::IpVersion;

/// Everything that can go wrong while checking, rendering, installing or removing rules.
///
/// Errors that come from iptables carry its stderr verbatim (minus the "Try `-h`" hint)
/// because its wording ("Port \"x\" does not resolve to anything") is what a user needs.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ControlError {
    /// A rule is wrong before iptables ever sees it (table/hook mismatch, queue range, ...).
    #[error("queue rule {index}: {reason}")]
    InvalidRule {
        /// Position of the rule in [`RuleSet::rules`](crate::RuleSet::rules).
        index: usize,
        /// What is wrong, in words.
        reason: String,
    },
    /// A rule's `matches` string cannot be split or uses an option relayd reserves.
    #[error("queue rule {index}: invalid match: {error}")]
    BadMatch {
        /// Position of the rule in [`RuleSet::rules`](crate::RuleSet::rules).
        index: usize,
        /// Why the match was refused.
        error: MatchError,
    },
    /// The rule set as a whole is unusable (bad prefix, zero bypass mark).
    #[error("invalid rule set: {0}")]
    InvalidRuleSet(String),
    /// iptables-restore refused one rule while validating it.
    #[error("queue rule {index} ({family}) rejected by {program}: {stderr} (rule: `{line}`)")]
    RuleRejected {
        /// Position of the rule in [`RuleSet::rules`](crate::RuleSet::rules).
        index: usize,
        /// The family whose tool refused it.
        family: IpVersion,
        /// The program that refused it, e.g. `iptables-restore`.
        program: String,
        /// The rule line that was tested.
        line: String,
        /// iptables' stderr, trimmed.
        stderr: String,
    },
    /// The iptables binary (or `ip` for a namespaced backend) is not installed.
    #[error("`{program}` was not found: install iptables or configure the right path")]
    ToolMissing {
        /// The program that could not be started.
        program: String,
    },
    /// The tool ran but may not change the firewall.
    #[error(
        "`{program}` is not permitted to change the firewall (run as root or with \
         CAP_NET_ADMIN): {detail}"
    )]
    NotPermitted {
        /// The program that was refused.
        program: String,
        /// The error as reported by the OS or the tool.
        detail: String,
    },
    /// The tool ran and failed for another reason.
    #[error("`{program}` failed ({status}): {stderr}")]
    ToolFailed {
        /// The program that failed.
        program: String,
        /// Its exit status, as text (`exit status: 2`, `signal: 9`).
        status: String,
        /// Its stderr, trimmed.
        stderr: String,
    },
    /// The tool could not be started or talked to for an unexpected I/O reason.
    #[error("could not run `{program}`: {source}")]
    Io {
        /// The program involved.
        program: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}
