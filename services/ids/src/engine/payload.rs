//! Payload inspection of packet rules: one match list over one buffer with a fresh
//! budget, and the payload list against the packet and the reassembled stream window
//! (docs/ids.md, "Streams").

use super::INSPECT_BUDGET;
use crate::engine::inspect::inspect_list;
use crate::rules::rule::{MatchList, StreamMode, Vars};

/// The stream window a TCP payload rule also inspects: `bytes[old..]` is what this
/// packet completed.
pub(super) struct Win<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) old: usize,
}

impl Win<'_> {
    /// True if `payload` is the part of the window this packet completed, or inside it.
    pub(super) fn contains(&self, payload: &[u8]) -> bool {
        let new = self.bytes.get(self.old..).unwrap_or(&[]);
        new.len() >= payload.len() && new.get(..payload.len()) == Some(payload)
    }
}

/// One list over one buffer, with a fresh budget.
pub(super) fn list_matches(
    list: &MatchList,
    buf: &[u8],
    re: &[regex::bytes::Regex],
    vars: &mut Vars,
) -> bool {
    let mut budget = INSPECT_BUDGET;
    inspect_list(list, buf, re, vars, &mut budget)
}

/// The payload list of a packet rule against the packet and the stream window.
pub(super) fn payload_matches(
    list: &MatchList,
    mode: StreamMode,
    payload: &[u8],
    win: Option<&Win<'_>>,
    re: &[regex::bytes::Regex],
    vars: &mut Vars,
) -> bool {
    if mode != StreamMode::Only && list_matches(list, payload, re, vars) {
        return true;
    }
    if mode == StreamMode::No {
        return false;
    }
    let Some(w) = win else { return false };
    let mut v = *vars;
    if !list_matches(list, w.bytes, re, &mut v) {
        return false;
    }
    // Only a match that needs this packet's bytes is new.
    let old = w.bytes.get(..w.old).unwrap_or(&[]);
    let mut v_old = *vars;
    if !old.is_empty() && list_matches(list, old, re, &mut v_old) {
        return false;
    }
    *vars = v;
    true
}
