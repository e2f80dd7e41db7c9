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

/// The two nfmark bits through which relayd's own rules learn how far along the packet
/// path a packet relayd handled has come, so that it skips only the hooks it has already
/// crossed.
///
/// A packet relayd gives back to its hook (a repeat verdict) or sends itself (a
/// family-changing re-send, an ICMP error, a TCP reset) carries the *stage* of the queue
/// that handled it, and relayd's chain at each hook returns early for packets whose stage
/// is at least that hook's:
///
/// | hook | stage | a packet carrying it |
/// |---|---|---|
/// | PREROUTING | 1 | skips relayd's PREROUTING queues, still meets INPUT, FORWARD, POSTROUTING |
/// | INPUT, FORWARD, OUTPUT | 2 | skips those three, still meets POSTROUTING |
/// | POSTROUTING | 3 | skips every relayd queue |
///
/// A packet sent from a socket is locally generated: the kernel walks it through OUTPUT and
/// POSTROUTING only. One that a PREROUTING or INPUT queue sends (a decapsulated inner packet)
/// is still on its way through the router, so it carries stage 1 ([`StageMark::for_send`]),
/// and relayd's OUTPUT chain hands stage-1 packets to the FORWARD queues' rules as well,
/// which an IDS on FORWARD therefore still sees.
///
/// Stages only grow, so no packet can loop between relayd's queues. The lower of the two
/// bits is stage 1, the higher stage 2, both stage 3; the default is bits 30 and 31.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StageMark {
    low: u32,
    high: u32,
}

impl StageMark {
    /// Bits 30 and 31 (`0xc0000000`), which the tc classifiers relayd installs ignore.
    pub const DEFAULT_MASK: u32 = 0xc000_0000;

    /// The default bits.
    pub const DEFAULT: StageMark = StageMark {
        low: 0x4000_0000,
        high: 0x8000_0000,
    };

    /// The stage field made of the two bits of `mask`; an error unless exactly two bits
    /// are set.
    pub fn from_mask(mask: u32) -> Result<StageMark, String> {
        if mask.count_ones() != 2 {
            return Err(format!(
                "{mask:#x} must have exactly two bits set: relayd keeps in them how far a \
                 packet it handled has come (default 0xc0000000)"
            ));
        }
        let low = mask & mask.wrapping_neg();
        Ok(StageMark {
            low,
            high: mask & !low,
        })
    }

    /// Both bits.
    pub fn mask(self) -> u32 {
        self.low | self.high
    }

    /// The stage of `hook` (see the table above).
    pub fn stage(hook: Hook) -> u8 {
        match hook {
            Hook::Prerouting => 1,
            Hook::Input | Hook::Forward | Hook::Output => 2,
            Hook::Postrouting => 3,
        }
    }

    /// The bits of `stage` (0 to 3).
    pub fn bits(self, stage: u8) -> u32 {
        (if stage & 1 != 0 { self.low } else { 0 }) | (if stage & 2 != 0 { self.high } else { 0 })
    }

    /// The bits a packet a queue on `hook` repeats carries.
    pub fn for_hook(self, hook: Hook) -> u32 {
        self.bits(Self::stage(hook))
    }

    /// The stage of a packet a queue on `hook` sends from a socket: as [`StageMark::stage`],
    /// but INPUT counts as PREROUTING. What an INPUT queue sends onwards (a packet it
    /// decapsulated from a tunnel addressed to this box) has crossed no FORWARD queue yet,
    /// and must meet them (from relayd's OUTPUT chain).
    pub fn send_stage(hook: Hook) -> u8 {
        match hook {
            Hook::Input => 1,
            _ => Self::stage(hook),
        }
    }

    /// The bits a packet a queue on `hook` sends from a socket carries.
    pub fn for_send(self, hook: Hook) -> u32 {
        self.bits(Self::send_stage(hook))
    }

    /// The stage `mark` carries.
    pub fn stage_of(self, mark: u32) -> u8 {
        u8::from(mark & self.low != 0) | (u8::from(mark & self.high != 0) << 1)
    }

    /// `mark` with its stage bits replaced by `bits`.
    pub fn with(self, mark: u32, bits: u32) -> u32 {
        (mark & !self.mask()) | (bits & self.mask())
    }

    /// The iptables `mark` match of the packets relayd's chain at `hook` skips (those whose
    /// stage is at least the hook's): `(negated, value, mask)` for `-m mark [!] --mark
    /// value/mask`.
    pub fn skip_match(self, hook: Hook) -> (bool, u32, u32) {
        match Self::stage(hook) {
            // Any stage: not zero.
            1 => (true, 0, self.mask()),
            // Stage 2 or 3: the high bit.
            2 => (false, self.high, self.high),
            _ => (false, self.mask(), self.mask()),
        }
    }

    /// The iptables `mark` match of stage-1 packets (sent by a PREROUTING queue):
    /// `(value, mask)`.
    pub fn prerouting_match(self) -> (u32, u32) {
        (self.low, self.mask())
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

    #[test]
    fn stages_only_grow_along_the_path_and_skip_what_was_crossed() {
        let m = StageMark::DEFAULT;
        assert_eq!(StageMark::from_mask(0xc000_0000), Ok(m));
        assert!(StageMark::from_mask(0x4000_0000).is_err());
        assert!(StageMark::from_mask(0).is_err());
        assert!(StageMark::from_mask(0x7).is_err());
        let odd = StageMark::from_mask(0x0100_0010).unwrap();
        assert_eq!(odd.bits(1), 0x10);
        assert_eq!(odd.bits(2), 0x0100_0000);
        assert_eq!(odd.stage_of(0xff), 1);
        // Does the chain at `at` skip a packet handled at `from`? Evaluate the iptables match.
        let skips = |from: Hook, at: Hook| {
            let mark = 0x1234 | m.for_hook(from);
            let (neg, value, mask) = m.skip_match(at);
            (mark & mask == value) != neg
        };
        use Hook::*;
        for from in Hook::ALL {
            assert!(skips(from, from), "{from} must skip its own hook");
            assert!(
                from == Postrouting || !skips(from, Postrouting),
                "{from} must still meet POSTROUTING"
            );
        }
        assert!(!skips(Prerouting, Forward) && !skips(Prerouting, Output));
        assert!(!skips(Prerouting, Input));
        assert!(skips(Forward, Output) && skips(Output, Forward));
        // A packet nobody handled is never skipped.
        for at in Hook::ALL {
            let (neg, value, mask) = m.skip_match(at);
            assert!((0x1234 & mask == value) == neg);
        }
        assert_eq!(m.with(0xc000_0001, m.for_hook(Prerouting)), 0x4000_0001);
        // What an INPUT queue sends onwards meets the FORWARD copies in OUTPUT (stage 1);
        // what it repeats skips INPUT.
        assert_eq!(m.for_send(Input), m.bits(1));
        assert!(skips(Input, Input));
        for h in [Prerouting, Forward, Output, Postrouting] {
            assert_eq!(m.for_send(h), m.for_hook(h));
        }
    }
}
