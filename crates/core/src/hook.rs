//! The netfilter hooks: where a queue's rule hangs, and where a queued packet came from.
//! One type for both, so a hook has one name in configuration, rules, status and code.

use std::fmt;
use std::str::FromStr;

/// A netfilter hook of the IPv4/IPv6 families (`NF_INET_*`): the built-in chain a queue's
/// rule hangs from, and the hook a queued packet was taken from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Hook {
    /// Before routing; the destination can still change.
    Prerouting,
    /// Locally delivered packets.
    Input,
    /// Routed packets; the egress interface is known.
    Forward,
    /// Locally generated packets, routed again after the hook.
    Output,
    /// Every packet leaving, after NAT.
    Postrouting,
}

impl Hook {
    /// Maps the kernel's hook number (`NF_INET_PRE_ROUTING` = 0 ... `NF_INET_POST_ROUTING` = 4).
    pub fn from_kernel(n: u8) -> Option<Hook> {
        Hook::ALL.get(n as usize).copied()
    }

    /// Every hook, in packet-path order.
    pub const ALL: [Hook; 5] = [
        Hook::Prerouting,
        Hook::Input,
        Hook::Forward,
        Hook::Output,
        Hook::Postrouting,
    ];

    /// The configuration name, lowercase (`forward`).
    pub fn as_str(self) -> &'static str {
        match self {
            Hook::Prerouting => "prerouting",
            Hook::Input => "input",
            Hook::Forward => "forward",
            Hook::Output => "output",
            Hook::Postrouting => "postrouting",
        }
    }

    /// The built-in iptables chain name, uppercase (`FORWARD`); also the suffix of
    /// relayd's own chain for this hook.
    pub fn chain(self) -> &'static str {
        match self {
            Hook::Prerouting => "PREROUTING",
            Hook::Input => "INPUT",
            Hook::Forward => "FORWARD",
            Hook::Output => "OUTPUT",
            Hook::Postrouting => "POSTROUTING",
        }
    }
}

impl fmt::Display for Hook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Hook {
    type Err = String;

    /// Accepts the lowercase configuration names (and, leniently, the chain names).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Hook::ALL
            .into_iter()
            .find(|h| h.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                format!(
                    "unknown hook `{s}` (expected prerouting, input, forward, output or \
                     postrouting)"
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_numbers_and_names() {
        assert_eq!(Hook::from_kernel(0), Some(Hook::Prerouting));
        assert_eq!(Hook::from_kernel(4), Some(Hook::Postrouting));
        assert_eq!(Hook::from_kernel(5), None);
        assert_eq!("FORWARD".parse::<Hook>().unwrap().as_str(), "forward");
        assert_eq!(Hook::Output.chain(), "OUTPUT");
        assert!("sideways".parse::<Hook>().is_err());
    }
}
