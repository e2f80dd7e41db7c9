//! `flowbits`: named booleans kept per flow. Names are interned once per rule set into
//! bit numbers; a flow holds only the words up to its highest bit set, so a flow that
//! sets nothing costs nothing, and one that sets everything costs at most
//! `names / 8` bytes (the names a rule set can mention).

use crate::rules::rule::{FlowbitCmd, FlowbitOp};
use std::collections::HashMap;

/// One `flowbits` keyword with its names as bit numbers.
#[derive(Debug, Clone)]
pub(crate) struct BitOp {
    cmd: FlowbitCmd,
    bits: Vec<u32>,
    all: bool,
}

/// The interned names of a rule set.
#[derive(Debug, Default)]
pub(crate) struct Names(HashMap<String, u32>);

impl Names {
    /// The ops of one rule, interning its names.
    pub(crate) fn compile(&mut self, ops: &[FlowbitOp]) -> Vec<BitOp> {
        ops.iter()
            .map(|op| BitOp {
                cmd: op.cmd,
                bits: op
                    .names
                    .iter()
                    .map(|n| {
                        let next = self.0.len() as u32;
                        *self.0.entry(n.clone()).or_insert(next)
                    })
                    .collect(),
                all: op.all,
            })
            .collect()
    }

    /// Number of distinct names.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

/// The bits of one flow.
#[derive(Debug, Default, Clone)]
pub(crate) struct FlowBits(Vec<u64>);

impl FlowBits {
    fn get(&self, b: u32) -> bool {
        self.0
            .get((b / 64) as usize)
            .is_some_and(|w| w & (1 << (b % 64)) != 0)
    }

    fn set(&mut self, b: u32, v: bool) {
        let i = (b / 64) as usize;
        if i >= self.0.len() {
            if !v {
                return;
            }
            self.0.resize(i + 1, 0);
        }
        if let Some(w) = self.0.get_mut(i) {
            if v {
                *w |= 1 << (b % 64);
            } else {
                *w &= !(1 << (b % 64));
            }
        }
    }
}

/// True if the `isset` / `isnotset` tests of `ops` hold. Without a flow (`None`) a rule
/// with any flowbits test does not match, as in Suricata.
pub(crate) fn test(ops: &[BitOp], bits: Option<&FlowBits>) -> bool {
    let mut tested = ops
        .iter()
        .filter(|o| matches!(o.cmd, FlowbitCmd::IsSet | FlowbitCmd::IsNotSet))
        .peekable();
    if tested.peek().is_none() {
        return true;
    }
    let Some(bits) = bits else { return false };
    tested.all(|o| {
        let want = o.cmd == FlowbitCmd::IsSet;
        let one = |&b: &u32| bits.get(b) == want;
        if o.all {
            o.bits.iter().all(one)
        } else {
            o.bits.iter().any(one)
        }
    })
}

/// Applies the `set` / `unset` / `toggle` of a matching rule.
pub(crate) fn apply(ops: &[BitOp], bits: &mut FlowBits) {
    for o in ops {
        for &b in &o.bits {
            match o.cmd {
                FlowbitCmd::Set => bits.set(b, true),
                FlowbitCmd::Unset => bits.set(b, false),
                FlowbitCmd::Toggle => {
                    let v = bits.get(b);
                    bits.set(b, !v)
                }
                FlowbitCmd::IsSet | FlowbitCmd::IsNotSet => {}
            }
        }
    }
}

/// True if `ops` change bits (the rule is a setter: Suricata orders setters first).
pub(crate) fn sets(ops: &[FlowbitOp]) -> bool {
    ops.iter().any(|o| {
        matches!(
            o.cmd,
            FlowbitCmd::Set | FlowbitCmd::Unset | FlowbitCmd::Toggle
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(cmd: FlowbitCmd, names: &[&str], all: bool) -> FlowbitOp {
        FlowbitOp {
            cmd,
            names: names.iter().map(|s| s.to_string()).collect(),
            all,
        }
    }

    #[test]
    fn set_test_toggle_unset() {
        let mut n = Names::default();
        let set = n.compile(&[op(FlowbitCmd::Set, &["a"], false)]);
        let isset = n.compile(&[op(FlowbitCmd::IsSet, &["a"], false)]);
        let isnot = n.compile(&[op(FlowbitCmd::IsNotSet, &["a"], false)]);
        let either = n.compile(&[op(FlowbitCmd::IsSet, &["b", "a"], false)]);
        let both = n.compile(&[op(FlowbitCmd::IsSet, &["b", "a"], true)]);
        let toggle = n.compile(&[op(FlowbitCmd::Toggle, &["a"], false)]);
        assert_eq!(n.len(), 2);
        let mut bits = FlowBits::default();
        assert!(!test(&isset, Some(&bits)) && test(&isnot, Some(&bits)));
        assert!(
            !test(&isset, None) && !test(&isnot, None),
            "no flow, no match"
        );
        assert!(test(&[], None));
        apply(&set, &mut bits);
        assert!(test(&isset, Some(&bits)) && !test(&isnot, Some(&bits)));
        assert!(test(&either, Some(&bits)) && !test(&both, Some(&bits)));
        apply(&toggle, &mut bits);
        assert!(!test(&isset, Some(&bits)));
        apply(&toggle, &mut bits);
        apply(
            &n.compile(&[op(FlowbitCmd::Unset, &["a"], false)]),
            &mut bits,
        );
        assert!(!test(&isset, Some(&bits)));
    }

    #[test]
    fn high_bits_grow_only_when_set() {
        let mut bits = FlowBits::default();
        bits.set(1000, false);
        assert!(bits.0.is_empty());
        bits.set(1000, true);
        assert!(bits.get(1000) && !bits.get(999));
        assert_eq!(bits.0.len(), 16);
    }
}
