//! The rule model: which NFQUEUE queues hang off which netfilter hook, in which table and
//! for which address family, plus the static checks that need no kernel.

use std::fmt;
use std::str::FromStr;

use crate::args::{MatchError, split_matches};
use crate::error::ControlError;
pub use relay_core::{Hook, IpVersion};

/// The iptables table a queue rule lives in.
///
/// Deliberately closed: `raw` runs before conntrack, `mangle` is the usual place for
/// NFQUEUE; relayd never queues from `filter` or `nat` (see DESIGN.md, "Hooks and routing").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Table {
    /// The `mangle` table (every hook). The default.
    #[default]
    Mangle,
    /// The `raw` table (PREROUTING and OUTPUT only), before conntrack sees the packet.
    Raw,
}

impl Table {
    /// Every table relayd may own chains in, in the order rules are rendered.
    pub const ALL: [Table; 2] = [Table::Mangle, Table::Raw];

    /// The iptables name: `mangle` or `raw`.
    pub fn as_str(self) -> &'static str {
        match self {
            Table::Mangle => "mangle",
            Table::Raw => "raw",
        }
    }

    /// The hooks this table has a built-in chain for.
    pub fn hooks(self) -> &'static [Hook] {
        match self {
            Table::Mangle => &Hook::ALL,
            Table::Raw => &[Hook::Prerouting, Hook::Output],
        }
    }

    /// Whether this table has a built-in chain for `hook`.
    pub fn has_hook(self, hook: Hook) -> bool {
        self.hooks().contains(&hook)
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Table {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "mangle" => Ok(Table::Mangle),
            "raw" => Ok(Table::Raw),
            _ => Err(format!("unknown table `{s}` (expected mangle or raw)")),
        }
    }
}

/// One configured queue: where its NFQUEUE rule goes and what it matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueRule {
    /// The table of relayd's chain (`raw` only has PREROUTING and OUTPUT).
    pub table: Table,
    /// The hook whose built-in chain jumps to relayd's chain.
    pub hook: Hook,
    /// Which of iptables/ip6tables get the rule; must not be empty.
    pub families: Vec<IpVersion>,
    /// Plain iptables match syntax (`-i eth0 -p udp --dport 5000`), split shell-like.
    /// Must not pick the target, chain, table or family. `None` queues everything.
    pub matches: Option<String>,
    /// First queue number.
    pub first_queue: u16,
    /// Last queue number; equal to `first_queue` for one queue, larger for
    /// `--queue-balance first:last`.
    pub last_queue: u16,
    /// Emit `--queue-bypass`: accept packets while no program is bound (fail-open when
    /// relayd is down). The queue's own fail-open flag is set elsewhere.
    pub bypass: bool,
    /// Emit `--queue-cpu-fanout`: pick the queue by CPU instead of flow hash. Needs a range.
    pub cpu_fanout: bool,
    /// Rules placed just before the queue rule, with its match: what the queue's services
    /// need the kernel to do to a packet first (clamp the TCP MSS, note conntrack state).
    pub pre: Vec<PreRule>,
}

/// A rule relayd puts right before a queue rule, built from its match (see
/// [`QueueRule::pre`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreRule {
    /// Only for this family (`None`: wherever the queue rule is installed).
    pub family: Option<IpVersion>,
    /// Everything after `-A CHAIN`: the queue rule's match (narrowed), then the target
    /// (`-s 10.0.1.0/24 -p tcp --tcp-flags SYN,RST SYN -j TCPMSS --set-mss 1400`).
    pub args: Vec<String>,
}

impl PreRule {
    /// The queue rule's match `matches` followed by `args`, for `family` (`None`: both);
    /// `None` if the match does not split into arguments.
    pub fn with_match(
        family: Option<IpVersion>,
        matches: Option<&str>,
        args: Vec<String>,
    ) -> Option<PreRule> {
        let mut out = match matches {
            Some(m) => split_matches(m).ok()?,
            None => Vec::new(),
        };
        out.extend(args);
        Some(PreRule { family, args: out })
    }

    /// A TCPMSS clamp for `family`, for a queue whose match is `matches`, narrowed to TCP
    /// SYNs; `None` when that match cannot select TCP, since then there is nothing to clamp.
    pub fn clamp_mss(family: IpVersion, matches: Option<&str>, mss: u16) -> Option<PreRule> {
        let mut out = match matches {
            Some(m) => split_matches(m).ok()?,
            None => Vec::new(),
        };
        let at = out.iter().position(|a| a == "-p" || a == "--protocol");
        let negated = at.is_some_and(|i| i > 0 && out[i - 1] == "!");
        let value = at.and_then(|i| out.get(i + 1)).map(String::as_str);
        let is_tcp = matches!(value, Some("tcp" | "6"));
        match (at, negated, is_tcp) {
            (None, _, _) => out.extend(["-p", "tcp"].map(String::from)),
            (Some(_), false, true) => {}
            // `! -p esp` admits TCP: say `-p tcp` instead (iptables takes one -p).
            (Some(i), true, false) => {
                out.drain(i - 1..(i + 2).min(out.len()));
                out.extend(["-p", "tcp"].map(String::from));
            }
            _ => return None,
        }
        out.extend(
            ["--tcp-flags", "SYN,RST", "SYN", "-j", "TCPMSS", "--set-mss"].map(String::from),
        );
        out.push(mss.to_string());
        Some(PreRule {
            family: Some(family),
            args: out,
        })
    }
}

impl QueueRule {
    /// Whether this rule is installed for `family`.
    pub fn applies_to(&self, family: IpVersion) -> bool {
        self.families.contains(&family)
    }

    /// The match arguments, split and checked.
    pub fn match_args(&self) -> Result<Vec<String>, MatchError> {
        match &self.matches {
            Some(m) => split_matches(m),
            None => Ok(Vec::new()),
        }
    }

    /// The target arguments: `-j NFQUEUE --queue-num N [--queue-bypass]` or
    /// `-j NFQUEUE --queue-balance A:B [--queue-bypass] [--queue-cpu-fanout]`, in the
    /// order iptables-save prints them.
    pub fn target_args(&self) -> Vec<String> {
        let mut out = vec!["-j".to_owned(), "NFQUEUE".to_owned()];
        if self.first_queue == self.last_queue {
            out.push("--queue-num".to_owned());
            out.push(self.first_queue.to_string());
        } else {
            out.push("--queue-balance".to_owned());
            out.push(format!("{}:{}", self.first_queue, self.last_queue));
        }
        if self.bypass {
            out.push("--queue-bypass".to_owned());
        }
        if self.cpu_fanout {
            out.push("--queue-cpu-fanout".to_owned());
        }
        out
    }

    /// Match and target arguments together: everything after `-A CHAIN`.
    pub fn rule_args(&self) -> Result<Vec<String>, MatchError> {
        let mut args = self.match_args()?;
        args.extend(self.target_args());
        Ok(args)
    }

    /// Checks everything that can be checked without iptables.
    pub(crate) fn check(&self, index: usize) -> Result<(), ControlError> {
        let invalid = |reason: String| ControlError::InvalidRule { index, reason };
        if !self.table.has_hook(self.hook) {
            let hooks: Vec<_> = self.table.hooks().iter().map(|h| h.as_str()).collect();
            return Err(invalid(format!(
                "table {} has no {} hook (it has {})",
                self.table,
                self.hook,
                hooks.join(" and ")
            )));
        }
        if self.families.is_empty() {
            return Err(invalid(
                "no address family (ipv4, ipv6) selected".to_owned(),
            ));
        }
        if self.first_queue > self.last_queue {
            return Err(invalid(format!(
                "queue range {}-{} is reversed",
                self.first_queue, self.last_queue
            )));
        }
        if self.cpu_fanout && self.first_queue == self.last_queue {
            return Err(invalid(
                "cpu_fanout needs a queue range (first < last) to spread over".to_owned(),
            ));
        }
        self.match_args()
            .map_err(|error| ControlError::BadMatch { index, error })?;
        Ok(())
    }
}

/// A rule relayd owns that is not tied to a queue (the TCP split proxy's TPROXY and
/// CONNMARK rules): it goes at the top of relayd's chain for its table and hook, before the
/// bypass-mark `RETURN`, so that it also sees packets a queue gave back with relayd's
/// bypass mark (a SYN repeated with the divert mark).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedRule {
    /// The table of relayd's chain.
    pub table: Table,
    /// The hook whose relayd chain holds the rule.
    pub hook: Hook,
    /// Only for this family (`None`: both).
    pub family: Option<IpVersion>,
    /// Everything after `-A CHAIN`, match and target (`-p tcp -m mark --mark 0x1/0x1 -j
    /// TPROXY --on-port 9040 --tproxy-mark 0x10000000/0x10000000`).
    pub args: Vec<String>,
}

impl OwnedRule {
    /// Whether this rule is installed for `family`.
    pub fn applies_to(&self, family: IpVersion) -> bool {
        self.family.is_none_or(|f| f == family)
    }
}

/// Everything relayd installs: its chain prefix, the mark that exempts packets from being
/// queued again, the queue rules in configuration order, and rules of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleSet {
    /// Chain name prefix; chains are named `{prefix}-{HOOK}` (e.g. `RELAYD-FORWARD`).
    pub prefix: String,
    /// The two mark bits in which packets relayd repeats or sends itself carry the stage of
    /// the hook that handled them ([`relay_core::StageMark`]); relayd's chain at each hook
    /// skips packets whose stage is at least the hook's.
    pub bypass_mark: u32,
    /// Queue rules in configuration order, which is also their order in each chain.
    pub rules: Vec<QueueRule>,
    /// Rules relayd owns besides the queue rules, in order, each at the top of its chain.
    pub owned: Vec<OwnedRule>,
}

impl RuleSet {
    /// The default chain prefix.
    pub const DEFAULT_PREFIX: &'static str = "RELAYD";
    /// The default stage bits (30 and 31).
    pub const DEFAULT_BYPASS_MARK: u32 = relay_core::StageMark::DEFAULT_MASK;
    /// Longest chain name iptables accepts (`XT_EXTENSION_MAXNAMELEN` minus the NUL).
    pub const MAX_CHAIN_NAME: usize = 28;

    /// A rule set with the default prefix and bypass mark.
    pub fn new(rules: Vec<QueueRule>) -> Self {
        RuleSet {
            prefix: Self::DEFAULT_PREFIX.to_owned(),
            bypass_mark: Self::DEFAULT_BYPASS_MARK,
            rules,
            owned: Vec::new(),
        }
    }

    /// The stage bits of [`RuleSet::bypass_mark`].
    pub fn stages(&self) -> Result<relay_core::StageMark, ControlError> {
        relay_core::StageMark::from_mask(self.bypass_mark)
            .map_err(|e| ControlError::InvalidRuleSet(format!("bypass_mark {e}")))
    }

    /// Whether a queue here may send packets from a socket before they reach FORWARD (a
    /// PREROUTING or INPUT queue): then relayd's OUTPUT chain gets copies of the FORWARD
    /// queue rules for them ([`relay_core::StageMark`]).
    pub fn resends_before_forward(&self) -> bool {
        self.rules
            .iter()
            .any(|r| matches!(r.hook, Hook::Prerouting | Hook::Input))
    }

    /// The name of relayd's chain for `hook`: `{prefix}-{HOOK}`.
    pub fn chain_name(&self, hook: Hook) -> String {
        chain_name(&self.prefix, hook)
    }

    /// Checks the whole set without iptables: prefix, mark and every rule.
    pub fn check(&self) -> Result<(), ControlError> {
        check_prefix(&self.prefix)?;
        self.stages()?;
        for (index, rule) in self.rules.iter().enumerate() {
            rule.check(index)?;
        }
        for rule in &self.owned {
            if !rule.table.has_hook(rule.hook) {
                return Err(ControlError::InvalidRuleSet(format!(
                    "table {} has no {} hook",
                    rule.table, rule.hook
                )));
            }
            if rule.args.is_empty() {
                return Err(ControlError::InvalidRuleSet(
                    "an owned rule without arguments".to_owned(),
                ));
            }
        }
        Ok(())
    }
}

impl Default for RuleSet {
    fn default() -> Self {
        RuleSet::new(Vec::new())
    }
}

pub(crate) fn chain_name(prefix: &str, hook: Hook) -> String {
    format!("{prefix}-{}", hook.chain())
}

/// A prefix must give valid chain names for every hook and never need quoting.
pub(crate) fn check_prefix(prefix: &str) -> Result<(), ControlError> {
    let bad = |why: &str| ControlError::InvalidRuleSet(format!("chain prefix `{prefix}` {why}"));
    let first = prefix.chars().next().ok_or_else(|| bad("is empty"))?;
    if !first.is_ascii_alphanumeric() {
        return Err(bad("must start with a letter or digit"));
    }
    if !prefix
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(bad("may only hold ASCII letters, digits, `_` and `-`"));
    }
    let longest = chain_name(prefix, Hook::Postrouting).len();
    if longest > RuleSet::MAX_CHAIN_NAME {
        return Err(bad(&format!(
            "is too long: chain names would reach {longest} characters, iptables allows {}",
            RuleSet::MAX_CHAIN_NAME
        )));
    }
    Ok(())
}

/// Parses a queue-number spec from the configuration: `"3"` or `"0-3"` (first <= last).
pub fn parse_queue_range(s: &str) -> Result<(u16, u16), String> {
    let num = |part: &str| -> Result<u16, String> {
        let part = part.trim();
        if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!(
                "invalid queue spec `{s}`: expected a number (0-65535) or a range like 0-3"
            ));
        }
        part.parse::<u16>()
            .map_err(|_| format!("invalid queue spec `{s}`: `{part}` is not within 0-65535"))
    };
    match s.split_once('-') {
        None => {
            let n = num(s)?;
            Ok((n, n))
        }
        Some((a, b)) => {
            let (first, last) = (num(a)?, num(b)?);
            if first > last {
                return Err(format!(
                    "invalid queue spec `{s}`: range start {first} is above its end {last}"
                ));
            }
            Ok((first, last))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for h in Hook::ALL {
            assert_eq!(h.to_string().parse::<Hook>(), Ok(h));
            assert_eq!(h.chain().parse::<Hook>(), Ok(h));
        }
        for t in Table::ALL {
            assert_eq!(t.to_string().parse::<Table>(), Ok(t));
        }
        for f in IpVersion::ALL {
            assert_eq!(f.to_string().parse::<IpVersion>(), Ok(f));
        }
        assert!("sideways".parse::<Hook>().is_err());
        assert!("filter".parse::<Table>().is_err());
    }

    #[test]
    fn queue_ranges() {
        assert_eq!(parse_queue_range("3"), Ok((3, 3)));
        assert_eq!(parse_queue_range("0-3"), Ok((0, 3)));
        assert_eq!(parse_queue_range(" 2 - 2 "), Ok((2, 2)));
        assert_eq!(parse_queue_range("65535"), Ok((65535, 65535)));
        for bad in [
            "", "-", "3-", "-3", "4-3", "65536", "0-70000", "a", "1-2-3", "+1",
        ] {
            assert!(parse_queue_range(bad).is_err(), "{bad:?} should fail");
        }
    }

    #[test]
    fn prefixes() {
        assert!(check_prefix("RELAYD").is_ok());
        assert!(check_prefix("relay_2-x").is_ok());
        for bad in ["", "-X", "A B", "A\"", "SIXTEEN_CHARS_XYZ"] {
            assert!(check_prefix(bad).is_err(), "{bad:?} should fail");
        }
    }
}
