//! Inspection of one match list (a rule's `content`, `pcre`, `isdataat`, `byte_*`, `bsize`
//! over one buffer), following Suricata's `detect-engine-content-inspection.c`.
//!
//! A cursor starts at 0 and moves to the end of each content and pcre match, to where a
//! `byte_jump` lands and past the bytes a `byte_extract` reads; relative keywords count
//! from it. When a later keyword fails, an earlier content or pcre whose next keyword
//! depends on its position (Suricata's `WITHIN_NEXT` / `RELATIVE_NEXT`, computed by the
//! parser as `retry`) is tried at its next occurrence: backtracking, bounded by a budget of
//! inspection steps (one per keyword evaluated, as Suricata's recursion limit) that the
//! caller gives per rule and buffer. Results are exactly Suricata's, including the cases
//! where it stops early because no other occurrence can help ("discontinue").
//!
//! Bounds: recursion depth is at most the list's length (the parser caps it at
//! [`MAX_ITEMS`]); nothing is allocated; extracted values live in the caller's [`Vars`].

#[cfg(test)]
mod tests;

use crate::rules::bytes::Vars;
use crate::rules::rule::{Content, Item, MatchList, PcreItem};
use regex::bytes::Regex;

/// The result of inspecting from one keyword on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Res {
    /// The rest of the list matched.
    Match,
    /// No match from here; an earlier keyword may try another position.
    NoMatch,
    /// No match, and no other position of an earlier keyword can change that (or the
    /// budget ran out): stop.
    Abort,
}

/// What one inspection reads.
struct Ctx<'a> {
    items: &'a [Item],
    buf: &'a [u8],
    regexes: &'a [Regex],
}

/// Inspects `buf` with `list`: true if every keyword matches, in Suricata's sense.
/// `regexes` are the rule's compiled pcres (indexed by [`PcreItem::index`]), `vars` the
/// rule's byte_extract values, `budget` the inspection steps left (decremented; at 0 the
/// list does not match).
pub(crate) fn inspect_list(
    list: &MatchList,
    buf: &[u8],
    regexes: &[Regex],
    vars: &mut Vars,
    budget: &mut u32,
) -> bool {
    let cx = Ctx {
        items: &list.items,
        buf,
        regexes,
    };
    step(&cx, 0, 0, vars, budget) == Res::Match
}

/// Inspects `items[i..]` with the cursor at `cursor`.
fn step(cx: &Ctx<'_>, i: usize, cursor: usize, vars: &mut Vars, budget: &mut u32) -> Res {
    let Some(item) = cx.items.get(i) else {
        return Res::Match;
    };
    if *budget == 0 {
        return Res::Abort;
    }
    *budget -= 1;
    let len = cx.buf.len();
    // Suricata: a keyword that matched passes on to the next one with the new cursor.
    let next = |to: usize, vars: &mut Vars, budget: &mut u32| step(cx, i + 1, to, vars, budget);
    match item {
        Item::Content(c) => content(cx, c, i, cursor, vars, budget),
        Item::Pcre(p) => pcre(cx, p, i, cursor, vars, budget),
        Item::IsDataAt(d) => match d.eval(len, cursor, vars) {
            Some(true) => next(cursor, vars, budget),
            Some(false) => Res::NoMatch,
            None => Res::Abort,
        },
        Item::ByteTest(t) => {
            if t.eval(cx.buf, cursor, vars) {
                next(cursor, vars, budget)
            } else {
                Res::NoMatch
            }
        }
        Item::ByteJump(j) => match j.eval(cx.buf, cursor, vars) {
            Some(to) => next(to, vars, budget),
            None => Res::NoMatch,
        },
        Item::ByteExtract(e) => match e.eval(cx.buf, cursor, vars) {
            Some(to) => next(to, vars, budget),
            None => Res::NoMatch,
        },
        // The size does not depend on the cursor: no other position can help.
        Item::Bsize(b) => {
            if b.test(len) {
                next(cursor, vars, budget)
            } else {
                Res::Abort
            }
        }
    }
}

/// A content at `items[i]`: its window from the cursor, then each occurrence in turn
/// while the keywords after it depend on where it ends.
fn content(
    cx: &Ctx<'_>,
    c: &Content,
    i: usize,
    cursor: usize,
    vars: &mut Vars,
    budget: &mut u32,
) -> Res {
    let len = cx.buf.len();
    let Some((lo, hi)) = c.window(cursor, len, vars) else {
        return if c.negated {
            step(cx, i + 1, cursor, vars, budget)
        } else {
            Res::NoMatch
        };
    };
    let n = c.pat.len();
    if c.negated {
        let found = if c.endswith {
            // Only an occurrence ending the buffer counts.
            len.checked_sub(n)
                .is_some_and(|at| at >= lo && hi == len && c.find(cx.buf, at, hi) == Some(at))
        } else {
            c.find(cx.buf, lo, hi).is_some()
        };
        if !found {
            // A negated content leaves the cursor where it was.
            return step(cx, i + 1, cursor, vars, budget);
        }
        return if c.is_single() {
            Res::Abort
        } else {
            Res::NoMatch
        };
    }
    let mut from = lo;
    loop {
        if from > hi {
            return Res::NoMatch;
        }
        let pos = if c.endswith {
            // The only occurrence that can end the buffer starts at len - n.
            let at = len.checked_sub(n).filter(|&at| at >= from && hi == len);
            at.and_then(|at| c.find(cx.buf, at, hi))
        } else {
            c.find(cx.buf, from, hi)
        };
        let Some(pos) = pos else {
            // An absolute content that is not there is not there for any cursor.
            return if c.relative() {
                Res::NoMatch
            } else {
                Res::Abort
            };
        };
        match step(cx, i + 1, pos + n, vars, budget) {
            Res::NoMatch if c.retry => from = pos + 1,
            Res::Match => return Res::Match,
            _ => return Res::Abort,
        }
    }
}

/// A pcre at `items[i]`: searched from the start of the buffer, or from the cursor with
/// `R` (`^` then anchors there), then at each later start while the keywords after it
/// depend on where it ends.
fn pcre(
    cx: &Ctx<'_>,
    p: &PcreItem,
    i: usize,
    cursor: usize,
    vars: &mut Vars,
    budget: &mut u32,
) -> Res {
    let Some(re) = cx.regexes.get(p.index) else {
        return Res::Abort;
    };
    let base = if p.relative { cursor } else { 0 };
    let Some(hay) = cx.buf.get(base..) else {
        return Res::NoMatch;
    };
    let mut start = 0;
    loop {
        // `find_at` keeps the context before `start` (`^` and `\b` see it).
        let m = if start <= hay.len() {
            re.find_at(hay, start)
        } else {
            None
        };
        match (m, p.negated) {
            (None, false) | (Some(_), true) => return Res::NoMatch,
            (None, true) => {
                // Suricata does not retry a negated pcre.
                return step(cx, i + 1, cursor, vars, budget);
            }
            (Some(m), false) => {
                let r = step(cx, i + 1, base + m.end(), vars, budget);
                if r != Res::NoMatch || !p.retry {
                    return r;
                }
                start = m.start() + 1;
            }
        }
    }
}
